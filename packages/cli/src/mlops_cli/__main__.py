from mlops_cli.app import main

main()
