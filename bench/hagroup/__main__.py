"""`python -m bench.hagroup up|down|status|remove [--root var/ha] [--base 25400]`: the
replicated group on loopback (bench/hagroup), started until healthy, stopped, shown or wiped."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.hagroup import GroupError, HaGroup


def _status(group: HaGroup) -> int:
    for member in group.patroni()["members"]:
        lag = member.get("lag", 0)
        print(f"{member['name']}  {member['role']:<12} {member['state']:<10} "
              f"{member['host']}:{member['port']}  lag {lag}")
    print(f"redis master: {group.redis_master()}")
    print(f"DATABASE_URL={group.url('streamgate')}")
    print(f"REDIS_URL={group.redis_url()}")
    problems = group.problems()
    for problem in problems:
        print(f"problem: {problem}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hagroup")
    parser.add_argument("action", choices=["up", "down", "status", "remove"])
    parser.add_argument("--root", type=Path, default=Path("var/ha"))
    parser.add_argument("--base", type=int, default=25400, help="first port of the group")
    args = parser.parse_args(argv)
    group = HaGroup(args.root.resolve(), args.base)
    try:
        if args.action == "up":
            group.up()
        elif args.action == "down":
            group.down()
            return 0
        elif args.action == "remove":
            group.remove()
            return 0
    except GroupError as error:
        print(error, file=sys.stderr)
        return 1
    return _status(group)


if __name__ == "__main__":
    sys.exit(main())
