import sys

from tuimon.cli.main import main

sys.exit(main())
