from leadwire.cli import main

main()
