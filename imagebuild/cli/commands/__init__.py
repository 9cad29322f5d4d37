"""One module per command: `configure(parser)` adds its arguments, `run(args)` does the work
through the core modules and prints. Core modules never print."""
