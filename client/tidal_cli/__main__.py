from tidal_cli.cli import main

main()
