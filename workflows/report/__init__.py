"""What a person reads: the run report, an approval's evidence, the --json views."""
