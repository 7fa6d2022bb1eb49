from parent.cli import main

main()
