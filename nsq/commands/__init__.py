"""Thin ``nsq`` subcommands: flags in, a call into the library out."""
