from farm.cli import main

raise SystemExit(main())
