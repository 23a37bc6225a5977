"""`python -m workloadlang.report RESULTS.json [...] -o report.html` (same as `wl report`)."""

from __future__ import annotations

import argparse
import sys

from workloadlang.report import ReportRequest, report_command


def main(argv: list[str] | None = None) -> int:
    """Input: argv. Output: the exit code of `report_command`."""
    ap = argparse.ArgumentParser(prog="python -m workloadlang.report",
                                 description="results JSON files -> one HTML report")
    ap.add_argument("results", nargs="+", help="results JSON files (wl run --output) of one workload")
    ap.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    args = ap.parse_args(argv)
    return report_command(ReportRequest(results=tuple(args.results), output=args.output))


if __name__ == "__main__":
    sys.exit(main())
