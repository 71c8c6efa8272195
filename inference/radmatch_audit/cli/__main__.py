import sys

from radmatch_audit.cli.app import main

sys.exit(main())
