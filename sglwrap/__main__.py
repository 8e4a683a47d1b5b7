from sglwrap.cli import main

raise SystemExit(main())
