from isoagent.parent.daemon.server import main

main()
