from child.main import main

raise SystemExit(main())
