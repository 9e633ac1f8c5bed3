"""One module per `attnlab` subcommand: each parses its flags, calls the library and prints."""
