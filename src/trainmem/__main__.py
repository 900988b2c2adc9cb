from trainmem.cli.main import main

raise SystemExit(main())
