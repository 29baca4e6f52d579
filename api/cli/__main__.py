"""`python -m api.cli`: the `evidence` command without its console script."""

from api.cli.main import app

app()
