from ceiling.cli.app import main

main()
