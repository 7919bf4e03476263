"""A torch.nn.Module's state_dict through dice's snapshot and back into
another module (dice._core._copy_model, the path a ModelExchanger takes):
every tensor arrives bit for bit whatever its layout, and a snapshot that
does not fit changes nothing."""

import unittest

import torch

from dice import _core


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = torch.nn.Linear(7, 5)
        self.bn = torch.nn.BatchNorm1d(5)  # an int64 buffer beside floats
        # Not contiguous: a transposed view, which dice loads with copy_.
        self.t = torch.nn.Parameter(torch.randn(3, 4).t())
        self.bf = torch.nn.Parameter(torch.randn(6).to(torch.bfloat16))


def state(m):
    return {k: v.clone() for k, v in m.state_dict().items()}


class ModelTest(unittest.TestCase):
    def test_every_tensor_arrives_bit_for_bit(self):
        src, dst = Net(1), Net(2)
        src.bn.num_batches_tracked.fill_(41)
        src.bn.running_mean.uniform_()
        self.assertFalse(dst.t.is_contiguous())
        self.assertIsNone(_core._copy_model(src, dst))
        for k, v in src.state_dict().items():
            got = dst.state_dict()[k]
            self.assertEqual(got.dtype, v.dtype, k)
            self.assertTrue(torch.equal(got, v), k)
        # Loaded into the module's own parameters, not into copies.
        self.assertTrue(torch.equal(dst.fc.weight, src.fc.weight))
        self.assertEqual(int(dst.bn.num_batches_tracked), 41)

    def test_a_load_between_forward_and_backward_is_caught_by_autograd(self):
        # A load writes the module's tensors in place: a backward through a
        # graph that saved the old ones refuses, as after copy_.
        src, dst = Net(1), Net(2)
        x = torch.randn(3, 7, requires_grad=True)
        y = dst.fc(x).sum()
        version = dst.fc.weight._version
        self.assertIsNone(_core._copy_model(src, dst))
        self.assertGreater(dst.fc.weight._version, version)
        with self.assertRaisesRegex(RuntimeError, "inplace operation"):
            y.backward()
        dst.fc(x).sum().backward()  # a forward after the load trains

    def test_a_snapshot_that_does_not_fit_changes_nothing(self):
        src = Net(1)
        other = torch.nn.Linear(7, 5)
        before = state(src)
        why = _core._copy_model(other, src)
        self.assertIsInstance(why, str)
        self.assertIn("tensors", why)
        for k, v in src.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        # Same names, one shape differs: refused before any tensor is written.
        wide = torch.nn.Linear(8, 5)
        narrow = torch.nn.Linear(7, 5)
        kept = state(narrow)
        why = _core._copy_model(wide, narrow)
        self.assertIn("shape", why)
        for k, v in narrow.state_dict().items():
            self.assertTrue(torch.equal(v, kept[k]), k)


if __name__ == "__main__":
    unittest.main()
