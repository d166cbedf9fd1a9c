from xlang.cli import main

main()
