from rocketpy.admin.cli import main

main()
