from race_cli.cli import main

main()
