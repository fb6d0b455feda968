"""Small helpers shared by rocketpy's layers."""
