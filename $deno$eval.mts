pid=1
timestamp=1795919203
tag=on host a
host=host-a:a4f49caf-008a-45b3-b9f1-9a79c125a0df:4026532179
start=1802573
token=728d4af4718f2cf96ca47d13ac0227b7
