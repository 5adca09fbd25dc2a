"""Lessons read off an error line beside the reference: each kind of refusal, and what gives none."""

import pytest

from dsonet.learn.code_lessons import from_error

TRAPZ = ("The code below has run.\n```python\nimport numpy as np\nw = np.linspace(0, 3, 7)\nsamples = 3 * w**2\n```\n"
         "Write one line of Python that assigns to r the integral of samples over w computed with the trapezoidal rule.")
FRAME = ("The code below has run.\n```python\nimport pandas as pd\ndf = pd.DataFrame({'a': [1]})\nother = df\n```\n"
         "Write one line of Python that assigns to r df with the rows of other added below.")


@pytest.mark.parametrize("problem, code, error, reference, lesson", [
    (TRAPZ, "```python\nr = np.trapz(samples, w)\n```", "AttributeError: module 'numpy' has no attribute 'trapz'",
     "r = np.trapezoid(samples, w)",
     "When computing the integral of x over w computed with the trapezoidal rule, use np.trapezoid(x, w), "
     "not np.trapz: this environment refuses np.trapz (AttributeError)."),
    (FRAME, "r = df.append(other)", "AttributeError: 'DataFrame' object has no attribute 'append'",
     "r = pd.concat([df, other])",
     "When computing x with the rows of y added below, use pd.concat([x, y]), not DataFrame.append: this "
     "environment refuses DataFrame.append (AttributeError)."),
    (FRAME, "r = AdaBoostClassifier(base_estimator=DecisionTreeClassifier())",
     "TypeError: AdaBoostClassifier.__init__() got an unexpected keyword argument 'base_estimator'",
     "r = AdaBoostClassifier(estimator=DecisionTreeClassifier())", "use estimator=, not base_estimator="),
    (FRAME, "r = OneHotEncoder(sparse=False).fit_transform(df)",
     "TypeError: OneHotEncoder.__init__() got an unexpected keyword argument 'sparse'",
     "r = OneHotEncoder(sparse_output=False).fit_transform(df)", "use sparse_output=False, not sparse=False"),
    (FRAME, "r = DecisionTreeRegressor(criterion='mse')",
     "InvalidParameterError: The 'criterion' parameter of DecisionTreeRegressor must be a str among "
     "{'squared_error'}. Got 'mse' instead.", "r = DecisionTreeRegressor(criterion='squared_error')",
     "use criterion='squared_error', not criterion='mse'"),
    (FRAME, "from scipy.integrate import simps; r = simps(y, x)",
     "ImportError: cannot import name 'simps' from 'scipy.integrate'",
     "from scipy.integrate import simpson; r = simpson(y, x)",
     "use scipy.integrate.simpson, not scipy.integrate.simps"),
])
def test_the_error_names_what_is_refused_and_the_reference_what_works(problem, code, error, reference, lesson):
    out = from_error(problem, code, error, reference)
    assert out is not None and lesson in out and out.startswith("When ") and len(out.split()) <= 32
    assert "samples" not in out and " df" not in out  # no task's variable


@pytest.mark.parametrize("error", ["r = 3.0, expected a different value", "no Python code found in the reply",
                                   "NameError: name 'foo' is not defined"])
def test_a_wrong_value_or_an_error_naming_nothing_the_reference_fixes_gives_no_lesson(error):
    assert from_error(TRAPZ, "r = np.trapz(samples, w)", error, "r = np.trapezoid(samples, w)") is None
