"""Kueue's own Configuration as the docs and deploy/ show it: the snippets and a strict
decode of them against Kueue's v1beta2 Configuration fields."""
