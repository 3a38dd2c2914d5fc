"""One module a subcommand. Each exposes ``register(subparsers)``; cli.py lists them."""
