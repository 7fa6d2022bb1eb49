from isoagent.child.main import main

raise SystemExit(main())
