from faultlens.cli import main

raise SystemExit(main())
