"""``python -m ferrocorn``: the same command as the ``ferrocorn`` script."""

from ferrocorn.cli import main

if __name__ == "__main__":
    main(prog_name="ferrocorn")
