from sglwrap.entry import main

raise SystemExit(main())
