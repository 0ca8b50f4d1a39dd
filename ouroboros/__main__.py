"""`python -m ouroboros`: the command line (`cli.py`).

A Ctrl-C before a command handles it itself (a run does once it has started; `tail -f` does)
lands here, as a KeyboardInterrupt from wherever the command was: loading its modules, reading
its settings, starting the run. It ends as any Ctrl-C does, in one line and exit code 0, not a
traceback. (One during `import ouroboros` itself, before this module runs, cannot be caught.)
"""

import sys

try:
    from ouroboros.cli import main

    code = main()
except KeyboardInterrupt:
    sys.stderr.write("stopped (Ctrl-C)\n")
    code = 0
raise SystemExit(code)
