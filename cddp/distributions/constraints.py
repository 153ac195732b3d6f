"""torch.distributions.constraints: the sets a parameter or a sample must lie in. check(value)
is a bool tensor over the batch dims (the event dims reduced), used by validate_args."""
from .. import _C

__all__ = ["Constraint", "MixtureSameFamilyConstraint", "boolean", "cat", "corr_cholesky",
           "dependent", "dependent_property", "greater_than", "greater_than_eq", "independent",
           "integer_interval", "interval", "half_open_interval", "is_dependent", "less_than",
           "lower_cholesky", "lower_triangular", "multinomial", "nonnegative",
           "nonnegative_integer", "one_hot", "positive", "positive_definite",
           "positive_integer", "positive_semidefinite", "real", "real_vector", "simplex",
           "square", "stack", "symmetric", "unit_interval"]


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__.lstrip("_") + "()"


class _Dependent(Constraint):
    """A placeholder for a support that depends on other parameters (Uniform's low/high)."""

    def __init__(self, *, is_discrete=False, event_dim=0):
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def __call__(self, *, is_discrete=False, event_dim=0):
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class dependent_property(property):
    """A property whose value is a constraint built from the instance (Uniform.support);
    on the class it reads as `dependent`."""

    def __init__(self, fn=None, *, is_discrete=False, event_dim=0):
        super().__init__(fn)
        self._is_discrete, self._event_dim = is_discrete, event_dim

    def __call__(self, fn):
        return dependent_property(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """base over `reinterpreted_batch_ndims` more event dims."""

    def __init__(self, base, reinterpreted_batch_ndims):
        self.base_constraint, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        ok = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        if ok.dim() < n:
            raise ValueError(f"Expected value.dim() >= {n + self.base_constraint.event_dim} "
                             f"but got {value.dim()}")
        return ok.reshape(tuple(ok.shape[:ok.dim() - n]) + (-1,)).all(-1) if n else ok

    def __repr__(self):
        return (f"IndependentConstraint({self.base_constraint!r}, "
                f"{self.reinterpreted_batch_ndims})")


class _Boolean(Constraint):
    """0 or 1."""
    is_discrete = True

    def check(self, value):
        return (value == 1) | (value == 0)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self):
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Real(Constraint):
    def check(self, value):
        return value == value                       # False only at NaN


class _Bound(Constraint):
    """lower_bound <op> value (and value <op> upper_bound for intervals)."""
    name, low_strict, high_strict, has_low, has_high = "", True, True, True, False

    def __init__(self, lower_bound=None, upper_bound=None):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        ok = value == value
        if self.has_low:
            ok = ok & (value > self.lower_bound if self.low_strict else value >= self.lower_bound)
        if self.has_high:
            ok = ok & (value < self.upper_bound if self.high_strict else value <= self.upper_bound)
        return ok

    def __repr__(self):
        args = ([f"lower_bound={self.lower_bound}"] if self.has_low else []) + \
            ([f"upper_bound={self.upper_bound}"] if self.has_high else [])
        return f"{self.name}({', '.join(args)})"


class _GreaterThan(_Bound):
    name = "GreaterThan"


class _GreaterThanEq(_Bound):
    name, low_strict = "GreaterThanEq", False


class _LessThan(_Bound):
    name, has_low, has_high = "LessThan", False, True

    def __init__(self, upper_bound):
        super().__init__(None, upper_bound)


class _Interval(_Bound):
    name, low_strict, high_strict, has_high = "Interval", False, False, True


class _HalfOpenInterval(_Bound):
    name, low_strict, high_strict, has_high = "HalfOpenInterval", False, True, True


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        tril = (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)
        return tril & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _CorrCholesky(Constraint):
    """Lower Cholesky factors of correlation matrices: lower triangular, positive diagonal,
    every row of unit Euclidean norm (within 10 * n * eps, torch's fudge factor)."""
    event_dim = 2

    def check(self, value):
        from .._finfo import finfo
        tol = finfo(value.dtype).eps * value.size(-1) * 10
        row_norm = value.detach().pow(2).sum(-1).sqrt()
        unit_row_norm = ((row_norm - 1.0).abs() <= tol).all(-1)
        return _LowerCholesky().check(value) & unit_row_norm


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        return _C.full(tuple(value.shape[:-2]), value.shape[-2] == value.shape[-1],
                       dtype=_C.bool)


class _Symmetric(_Square):
    def check(self, value):
        square = super().check(value)
        if not bool(square.all()):
            return square
        close = (value - value.mT).abs() <= 1e-6 + 1e-5 * value.mT.abs()   # isclose's tolerances
        return close.all(-2).all(-1)


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if not bool(sym.all()):
            return sym
        from ..linalg import eigvalsh
        return (eigvalsh(value.detach()) >= 0).all(-1)


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if not bool(sym.all()):
            return sym
        from ..linalg import cholesky_ex
        return cholesky_ex(value.detach())[1] == 0


class _Multinomial(Constraint):
    """Nonnegative integer counts summing to at most upper_bound (torch checks this weaker
    condition, not == upper_bound)."""
    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, x):
        return (x >= 0).all(-1) & (x.sum(-1) <= self.upper_bound)


class _Cat(Constraint):
    """cseq[i] applied to the i-th block (lengths[i] wide) of dim, as torch.cat lays them."""

    def __init__(self, cseq, dim=0, lengths=None):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq = list(cseq)
        self.lengths = list(lengths) if lengths is not None else [1] * len(self.cseq)
        if len(self.lengths) != len(self.cseq):
            raise AssertionError(f"lengths ({len(self.lengths)}) must match cseq "
                                 f"({len(self.cseq)})")
        self.dim = dim

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        if not -value.dim() <= self.dim < value.dim():
            raise AssertionError(f"dim {self.dim} out of range for value with {value.dim()} "
                                 "dimensions")
        checks, start = [], 0
        for c, length in zip(self.cseq, self.lengths):
            checks.append(c.check(value.narrow(self.dim, start, length)))
            start = start + length
        return _C.cat(checks, self.dim)


class _Stack(Constraint):
    """cseq[i] applied to value.select(dim, i), as torch.stack lays them."""

    def __init__(self, cseq, dim=0):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq, self.dim = list(cseq), dim

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, value):
        if not -value.dim() <= self.dim < value.dim():
            raise AssertionError(f"dim {self.dim} out of range for value with {value.dim()} "
                                 "dimensions")
        vs = [value.select(self.dim, i) for i in range(value.size(self.dim))]
        return _C.stack([c.check(v) for v, c in zip(vs, self.cseq)], self.dim)


class MixtureSameFamilyConstraint(Constraint):
    """The component distribution's support, with the mixture dim (the rightmost batch dim
    of the components) reduced: a value is valid when it is valid for every component."""

    def __init__(self, base_constraint):
        if not isinstance(base_constraint, Constraint):
            raise AssertionError("base_constraint must be a Constraint, got "
                                 f"{type(base_constraint).__name__}")
        self.base_constraint = base_constraint

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim

    def check(self, value):
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.dim() < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.dim()}")
        keep = value.dim() - self.event_dim
        return result.reshape(tuple(result.shape[:keep]) + (-1,)).all(-1)

    def __repr__(self):
        return f"MixtureSameFamilyConstraint({self.base_constraint!r})"


# the public constraint objects (singletons) and classes, by the names torch uses
dependent = _Dependent()
real, boolean, one_hot, simplex = _Real(), _Boolean(), _OneHot(), _Simplex()
real_vector = _IndependentConstraint(real, 1)
positive, nonnegative, unit_interval = _GreaterThan(0.0), _GreaterThanEq(0.0), _Interval(0.0, 1.0)
nonnegative_integer, positive_integer = _IntegerGreaterThan(0), _IntegerGreaterThan(1)
lower_triangular, lower_cholesky = _LowerTriangular(), _LowerCholesky()
positive_definite = _PositiveDefinite()
corr_cholesky, square, symmetric = _CorrCholesky(), _Square(), _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
multinomial, cat, stack = _Multinomial, _Cat, _Stack
(greater_than, greater_than_eq, less_than, interval, half_open_interval, integer_interval,
 independent) = (_GreaterThan, _GreaterThanEq, _LessThan, _Interval, _HalfOpenInterval,
                 _IntegerInterval, _IndependentConstraint)
