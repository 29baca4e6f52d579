"""trafilatura's own command line, trusting the bench's CA.

trafilatura downloads with urllib3 and passes `ca_certs=certifi.where()` explicitly, so
SSL_CERT_FILE and REQUESTS_CA_BUNDLE are ignored; without this it would fall back to an
unverified second handshake on every URL. This launcher points `certifi.where()` at
$BENCH_CA_BUNDLE (public roots plus the trustme CA), then runs the unmodified CLI.

Run: BENCH_CA_BUNDLE=bundle.pem python -m bench.trafilatura_cli -i urls.txt --config-file F
"""

from __future__ import annotations

import os
import sys

import certifi


def main() -> None:
    """Trust $BENCH_CA_BUNDLE, then hand over to `trafilatura.cli.main`."""
    bundle = os.environ.get("BENCH_CA_BUNDLE")
    if bundle:
        certifi.where = lambda: bundle  # type: ignore[assignment]
    from trafilatura.cli import main as cli_main

    sys.argv[0] = "trafilatura"
    cli_main()


if __name__ == "__main__":
    main()
