"""The `radmatch-audit` command line (`python -m radmatch_audit.cli`); see `app`.

Exit codes (`common`): 0 all went well; 1 some lines or pairs failed (the rest were
processed); 2 the command could not run; 130 interrupted; 141 the reader of the
output went away.
"""

from radmatch_audit.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
