"""``python -m torch_tpu.bench <tool>``; tools: host."""

import sys

TOOLS = ("host",)


def _main(argv) -> int:
    if not argv or argv[0] not in TOOLS:
        print(f"usage: python -m torch_tpu.bench {{{','.join(TOOLS)}}} [options]  (tool --help for its options)",
              file=sys.stderr)
        return 2
    from .host import main

    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
