"""Stand-ins for other projects' controllers, one module each, on top of ``apiserver``
(``standin.StandIn``): a new stand-in is one module here (docs/simulator.md)."""
