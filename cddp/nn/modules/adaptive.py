"""AdaptiveLogSoftmaxWithLoss (torch.nn.AdaptiveLogSoftmaxWithLoss): the adaptive softmax of
Grave et al. (https://arxiv.org/abs/1609.04309), composed from Linear, log_softmax, gather and
index_copy_ (each a C kernel with its own backward), so autograd needs no new code.

Layout (as torch's, so state_dicts load either way): head is Linear(in_features,
shortlist_size + n_clusters) whose first shortlist_size outputs are the frequent classes and the
last n_clusters outputs one logit per tail cluster; tail[i] is Sequential(Linear(in_features,
in_features // div_value ** (i + 1)), Linear(that, cluster size)), both without bias.

log p(c | x) = head_logprob[c] for a shortlist class, and
             = head_logprob[shortlist_size + i] + cluster_logprob_i[c - cutoffs[i]] for a class of
               cluster i.
forward evaluates each cluster only on the rows whose target falls in it, in torch's order of
operations (the values differ from torch's only by GEMM / log_softmax rounding).
"""
import itertools
from collections import namedtuple

from ... import _C
from .. import functional as F
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """forward(input (N, in_features) or (in_features,), target (N,) or ()) ->
    _ASMoutput(output: per-example target log-probability (N,) or (), loss: mean NLL ());
    log_prob(input (N, in_features)) -> (N, n_classes); predict(input) -> (N,) class ids."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()

        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if ((cutoffs != sorted(cutoffs)) or (min(cutoffs) <= 0)
                or (max(cutoffs) > (n_classes - 1)) or (len(set(cutoffs)) != len(cutoffs))
                or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted "
                             "in an increasing order, where each value is between 1 and "
                             "n_classes-1")

        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]      # cluster i covers [cutoffs[i], cutoffs[i+1])
        self.div_value = div_value
        self.head_bias = head_bias

        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters

        self.head = Linear(self.in_features, self.head_size, bias=self.head_bias,
                           **factory_kwargs)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(self.in_features // (self.div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            projection = Sequential(
                Linear(self.in_features, hsz, bias=False, **factory_kwargs),
                Linear(hsz, osz, bias=False, **factory_kwargs),
            )
            self.tail.append(projection)

    def reset_parameters(self):
        """Redraw every Linear as at construction."""
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        targ_dim = target_.dim()
        if targ_dim == 1:
            if input_.size(0) != target_.size(0):
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")
            if input_.dim() != 2:
                raise RuntimeError("1D target tensor expects 2D input tensors, but found inputs "
                                   f"with size {input_.size()}")
        elif targ_dim == 0:
            if input_.dim() != 1:
                raise RuntimeError("0D target tensor expects 1D input tensors, but found inputs "
                                   f"with size {input_.size()}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")

        # unbatched: one row of a batch of 1, squeezed back at the end
        is_batched = targ_dim > 0
        input = input_ if is_batched else input_.unsqueeze(0)      # noqa: A001  (B, F)
        target = target_ if is_batched else target_.unsqueeze(0)   # (B,)

        used_rows = 0
        batch_size = target.size(0)
        output = input.new_zeros(batch_size)        # (B,) the cluster-local log-probs
        gather_inds = target.new_empty(batch_size)  # (B,) the head column each row reads

        cutoff_values = [0] + self.cutoffs
        for i in range(len(cutoff_values) - 1):
            low_idx = cutoff_values[i]
            high_idx = cutoff_values[i + 1]

            target_mask = (target >= low_idx) & (target < high_idx)
            row_indices = target_mask.nonzero().squeeze()
            if row_indices.numel() == 0:
                continue

            if i == 0:                  # shortlist: the head column is the class itself
                gather_inds.index_copy_(0, row_indices, target[target_mask])
            else:                       # cluster i-1: its head column plus its own softmax
                relative_target = target[target_mask] - low_idx
                input_subset = input.index_select(0, row_indices)
                cluster_output = self.tail[i - 1](input_subset)
                cluster_index = self.shortlist_size + i - 1

                gather_inds.index_fill_(0, row_indices, cluster_index)
                cluster_logprob = F.log_softmax(cluster_output, dim=1)
                local_logprob = cluster_logprob.gather(1, relative_target.unsqueeze(1))
                output.index_copy_(0, row_indices, local_logprob.squeeze(1))

            used_rows += row_indices.numel()

        # every row must have landed in some bucket; otherwise a target is out of range
        if used_rows != batch_size:
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{target.min().item()}, "
                               f"{target.max().item()}] were found. ")

        head_output = self.head(input)
        head_logprob = F.log_softmax(head_output, dim=1)
        output += head_logprob.gather(1, gather_inds.unsqueeze(1)).squeeze()
        loss = (-output).mean()

        if not is_batched:
            output = output.squeeze(0)
        return _ASMoutput(output, loss)

    def _get_full_log_prob(self, input, head_output):  # noqa: A002
        """The full (N, n_classes) log-distribution from input (N, F) and head(input) (N, H)."""
        out = input.new_empty((head_output.size(0), self.n_classes))
        head_logprob = F.log_softmax(head_output, dim=1)

        out[:, :self.shortlist_size] = head_logprob[:, :self.shortlist_size]
        for i, (start_idx, stop_idx) in enumerate(itertools.pairwise(self.cutoffs)):
            cluster_output = self.tail[i](input)
            cluster_logprob = F.log_softmax(cluster_output, dim=1)
            output_logprob = cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1)
            out[:, start_idx:stop_idx] = output_logprob
        return out

    def log_prob(self, input):  # noqa: A002
        """Log-probabilities of all n_classes: (N, in_features) -> (N, n_classes)."""
        head_output = self.head(input)
        return self._get_full_log_prob(input, head_output)

    def predict(self, input):  # noqa: A002
        """log_prob(input).argmax(1), skipping the tails when every row's head argmax is a
        shortlist class (such a class beats every tail class, whose log-prob is at most its
        cluster's head log-prob)."""
        head_output = self.head(input)
        output = _C.argmax(head_output, dim=1)
        not_in_shortlist = output >= self.shortlist_size
        all_in_shortlist = not (not_in_shortlist.any())

        if all_in_shortlist:
            return output
        if not_in_shortlist.all():
            log_prob = self._get_full_log_prob(input, head_output)
            return _C.argmax(log_prob, dim=1)
        log_prob = self._get_full_log_prob(input[not_in_shortlist],
                                           head_output[not_in_shortlist])
        output[not_in_shortlist] = _C.argmax(log_prob, dim=1)
        return output
