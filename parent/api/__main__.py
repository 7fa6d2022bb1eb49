from isoagent.parent.cli.entry import main

main()
