from isoagent.parent.cli.main import main

main()
