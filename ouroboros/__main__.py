from ouroboros.cli import main

raise SystemExit(main())
