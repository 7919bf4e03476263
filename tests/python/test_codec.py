"""dice.codec: what Python sends without pickle."""

import math
import os
import unittest

import numpy as np
import torch

from dice import codec


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class CodecTest(unittest.TestCase):
    def round_trip(self, x):
        return codec.decode(codec.encode(x))

    def test_every_supported_type_round_trips(self):
        x = {
            "none": None, "t": True, "f": False, "int": -(2**63),
            "big": 2**63 - 1, "float": -1.5e300, "str": "héllo ✓",
            "bytes": b"\x00\xff", "bytearray": bytearray(b"ab"),
            "list": [1, [2, [3, []]]], "tuple": (1, "a", (None,)),
            "empty": {}, "nested": {"a": {"b": {"c": [0.5]}}},
        }
        back = self.round_trip(x)
        expected = dict(x, bytearray=b"ab")
        self.assertEqual(back, expected)
        self.assertIsInstance(back["tuple"], tuple)
        self.assertIsInstance(back["list"], list)
        self.assertEqual(list(back), list(x))  # key order kept
        self.assertTrue(math.isnan(self.round_trip(float("nan"))))

    def test_numpy_arrays_of_every_dtype_round_trip(self):
        for dt in ["float16", "float32", "float64", "int8", "int16", "int32",
                   "int64", "uint8", "bool"]:
            a = (np.arange(24) % 3).astype(dt).reshape(2, 3, 4)
            back = self.round_trip(a)
            self.assertEqual(back.dtype, a.dtype, dt)
            self.assertEqual(back.shape, a.shape)
            np.testing.assert_array_equal(back, a)
        zero_d = self.round_trip(np.array(3.5, dtype=np.float32))
        self.assertEqual(zero_d.shape, ())
        scalar = self.round_trip(np.float32(2.5))
        self.assertIsInstance(scalar, np.float32)
        empty = self.round_trip(np.zeros((0, 4), np.int64))
        self.assertEqual(empty.shape, (0, 4))
        strided = np.arange(12, dtype=np.float64).reshape(3, 4).T
        np.testing.assert_array_equal(self.round_trip(strided), strided)

    def test_torch_tensors_round_trip_as_tensors(self):
        for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                   torch.int64, torch.int32, torch.uint8, torch.bool]:
            t = (torch.arange(6) % 2).to(dt).reshape(2, 3)
            back = self.round_trip(t)
            self.assertIsInstance(back, torch.Tensor)
            self.assertEqual(back.dtype, dt)
            self.assertTrue(torch.equal(back, t))
        grad = torch.ones(3, requires_grad=True) * 2
        self.assertFalse(self.round_trip(grad).requires_grad)

    def test_unsupported_objects_are_refused_with_their_path(self):
        class Thing:
            pass

        cases = [
            ({"trajectories": [0, 1, 2, {"obs": lambda: 1}]},
             "value['trajectories'][3]['obs']"),
            ([Thing()], "value[0]"),
            ({"s": {1, 2}}, "value['s']"),
            ({"k": {1: "int key"}}, "value['k']"),
            ([2**64], "value[0]"),
            ({"c": torch.zeros(2, dtype=torch.complex64)}, "value['c']"),
            ({"o": np.array([object()])}, "value['o']"),
        ]
        for obj, path in cases:
            with self.assertRaises(TypeError, msg=path) as cm:
                codec.encode(obj)
            self.assertIn(path, str(cm.exception))

    def test_cycles_are_refused_not_followed(self):
        x = []
        x.append(x)
        with self.assertRaises(TypeError) as cm:
            codec.encode(x)
        self.assertIn("deeper than 64", str(cm.exception))

    def test_hostile_bytes_are_refused_and_counted(self):
        good = bytes(codec.encode({"obs": np.ones(8, np.float32), "r": [1, 2]}))
        rng = np.random.default_rng(7)
        hostile = [b"", b"\x80\x04\x95pickle", good[:-1], good + b"\x00",
                   bytes(rng.integers(0, 256, 200, dtype=np.uint8))]
        for cut in range(1, len(good), 7):
            hostile.append(good[:cut])
        for data in hostile:
            before = codec.rejected_count()
            with self.assertRaises(ValueError):
                codec.decode(data)
            self.assertEqual(codec.rejected_count(), before + 1, data[:16])

    def test_a_100_mb_tensor_is_copied_once_and_decoded_in_place(self):
        t = torch.arange(25_000_000, dtype=torch.float32)  # 100 MB
        nbytes = t.numel() * t.element_size()
        enc = codec.encode({"big": t})
        self.assertLess(len(enc) - nbytes, 4096)  # one buffer, the bytes once
        before = rss_bytes()
        back = codec.decode(enc)["big"]
        grown = rss_bytes() - before
        begin = enc.address
        self.assertGreaterEqual(back.data_ptr(), begin)
        self.assertLessEqual(back.data_ptr() + nbytes, begin + len(enc))
        self.assertEqual(back.data_ptr() % 64, 0)
        self.assertLess(grown, 16 << 20, "decoding allocated the tensor again")
        self.assertTrue(torch.equal(back[-3:], t[-3:]))
        del enc  # the decoded tensor keeps the bytes alive
        self.assertEqual(float(back[12_345_678]), 12_345_678.0)


if __name__ == "__main__":
    unittest.main()
