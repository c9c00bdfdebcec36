from extender.cli import main

main()
