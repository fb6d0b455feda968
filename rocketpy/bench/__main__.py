from rocketpy.bench.cli import main

main()
