from mpiopt.cli.main import main

raise SystemExit(main())
