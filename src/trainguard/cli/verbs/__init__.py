"""One module per verb of the trainguard command; see trainguard.cli.main."""
