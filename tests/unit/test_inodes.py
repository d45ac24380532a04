"""Inode numbers of view paths (polyfs/fs/inodes.py).

zarr-python's ``create_array(..., overwrite=True)`` on a mount once failed in
``shutil.rmtree`` with "Cannot call rmtree on a symbolic link": rmtree checks that the
directory it ``lstat``-ed is the one it opened, and a commit in between made the kernel
drop the domain's names, forget the inode, and look the path up again, which handed out
a new number. A path looked up again soon after gets its number back; numbers never
move to another path, and a new file made where one was unlinked or renamed over gets
one of its own."""
from __future__ import annotations

from polyfs.fs import inodes
from polyfs.fs.inodes import InodeTable


def test_a_forgotten_path_gets_its_number_back():
    t = InodeTable(object())  # type: ignore[arg-type]
    a = t.remember("zarr/x.zarr/a", object()).ino  # type: ignore[arg-type]
    b = t.remember("zarr/x.zarr/b", object()).ino  # type: ignore[arg-type]
    t.forget(a, 1)
    assert t.peek("zarr/x.zarr/a") is None
    assert t.remember("zarr/x.zarr/a", object()).ino == a  # type: ignore[arg-type]
    assert b != a and t.remember("zarr/x.zarr/b", object()).ino == b  # type: ignore[arg-type]


def test_unlinked_or_renamed_over_paths_get_new_numbers():
    t = InodeTable(object())  # type: ignore[arg-type]
    a = t.remember("d/f", object()).ino  # type: ignore[arg-type]
    t.forget(a, 1)
    t.detach("d/f")  # unlinked: the next file there is another file
    assert t.remember("d/f", object()).ino != a  # type: ignore[arg-type]
    g = t.remember("d/g", object()).ino  # type: ignore[arg-type]
    t.forget(g, 1)
    t.rename("d/tmp", "d/g", 0.0)
    assert t.remember("d/g", object()).ino != g  # type: ignore[arg-type]


def test_a_number_held_by_a_live_inode_is_never_given_twice():
    t = InodeTable(object())  # type: ignore[arg-type]
    a = t.remember("p", object()).ino  # type: ignore[arg-type]
    t.detach("p")  # unlinked while open: the old inode lives on
    b = t.remember("p", object()).ino  # type: ignore[arg-type]
    assert b != a
    t.forget(b, 1)
    assert t.remember("p", object()).ino == b  # type: ignore[arg-type]
    assert t.peek_ino(a) is not None and t.peek_ino(a).unlinked


def test_the_numbers_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(inodes, "RECENT", 4)
    t = InodeTable(object())  # type: ignore[arg-type]
    nums = {}
    for i in range(10):
        nums[i] = t.remember(f"f{i}", object()).ino  # type: ignore[arg-type]
        t.forget(nums[i], 1)
    assert len(t._recent) == 4
    assert t.remember("f9", object()).ino == nums[9]  # type: ignore[arg-type]
    assert t.remember("f0", object()).ino not in nums.values()  # type: ignore[arg-type]
