"""The command line: output, errors, hostile input, start-up."""
