from vllm_tune.cli.main import main

raise SystemExit(main())
