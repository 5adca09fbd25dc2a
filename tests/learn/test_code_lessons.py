"""Lessons read off an error line beside the reference: each kind of refusal, and what gives none."""

import pytest

from dsonet.learn import drift, parse
from dsonet.learn.code_lessons import follows, from_error, from_reference, refutes, repair

from .conftest import outputs_under_hash_seeds

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
     "use scipy.integrate.simpson(y, x), not scipy.integrate.simps"),
    # the code that ran imported the function; the lesson reaches it through the module the attempt reached
    (FRAME, "r = integrate.simps(y, x)", "AttributeError: module 'scipy.integrate' has no attribute 'simps'",
     "from scipy.integrate import simpson\nr = simpson(y, x)", "use integrate.simpson(y, x), not integrate.simps"),
])
def test_the_error_names_what_is_refused_and_the_reference_what_works(problem, code, error, reference, lesson):
    out = from_error(problem, code, error, reference)
    assert out and lesson in out[0]
    for form in out:
        assert form.startswith("When ") and len(form.split()) <= 32
        assert "samples" not in form and " df" not in form  # no task's variable


@pytest.mark.parametrize("code, error, reference, repaired", [
    ("```python\nr = np.trapz(samples, w)\n```", "AttributeError: module 'numpy' has no attribute 'trapz'",
     "r = np.trapezoid(samples, w)", "```python\nr = np.trapezoid(samples, w)\n```"),
    ("r = AdaBoostClassifier(base_estimator=DecisionTreeClassifier(max_depth=1))",
     "TypeError: AdaBoostClassifier.__init__() got an unexpected keyword argument 'base_estimator'",
     "r = AdaBoostClassifier(estimator=DecisionTreeClassifier())",
     "r = AdaBoostClassifier(estimator=DecisionTreeClassifier(max_depth=1))"),
    ("r = DecisionTreeRegressor(criterion='mse')",
     "InvalidParameterError: The 'criterion' parameter of DecisionTreeRegressor must be a str among "
     "{'squared_error'}. Got 'mse' instead.", "r = DecisionTreeRegressor(criterion='squared_error')",
     "r = DecisionTreeRegressor(criterion='squared_error')"),
    ("from scipy.integrate import simps; r = simps(y, x)", "ImportError: cannot import name 'simps' from 'scipy.integrate'",
     "from scipy.integrate import simpson; r = simpson(y, x)", "from scipy.integrate import simpson; r = simpson(y, x)"),
    ("r = df.append(other)", "AttributeError: 'DataFrame' object has no attribute 'append'",
     "r = pd.concat([df, other])", "r = pd.concat(other)"),  # the swap alone: running it shows it is not the fix
])
def test_repair_makes_the_one_swap_the_error_lines_lesson_advises(code, error, reference, repaired):
    assert repair(FRAME, code, error, reference) == repaired


def test_repair_is_none_where_the_error_line_spells_out_no_lesson():
    assert repair(TRAPZ, "r = np.trapz(samples, w)", "r = 3.0, expected a different value", "r = np.trapezoid(samples, w)") is None
    assert repair(TRAPZ, "r = np.trapz(samples, w)", "NameError: name 'foo' is not defined", "r = np.trapezoid(samples, w)") is None


def test_where_the_error_names_nothing_the_reference_spells_out_the_lesson():
    problem = ("The code below has run.\n```python\nimport numpy as np\narr = np.arange(5)\nvals = [1, 3]\n```\n"
               "Write one line of Python that assigns to r a boolean array saying, for each element of arr, "
               "whether it occurs anywhere in vals.")
    assert from_reference(problem, "r = [a in vals for a in arr]", "r = np.isin(arr, vals)") == [
        "When computing a boolean array saying, for each element of x, whether it occurs anywhere in y, use np.isin(x, y).",
        "When computing a boolean array saying, for each element of x, whether it occurs anywhere in y, use np.isin."]
    assert from_reference(problem, "r = np.isin(arr, vals).tolist()", "r = np.isin(arr, vals)") == []  # nothing new
    assert from_reference("Round it.", "r = 1", "r = np.round(v)") == []  # no task to say when


def test_the_name_a_lesson_gives_is_the_call_a_conversion_wraps_not_the_conversion():
    """Seen in a team's practice: the code that ran, ``np.array(nx.to_numpy_array(G))``, gave "use np.array."."""
    problem = ("The code below has run.\n```python\nimport networkx as nx\nG = nx.path_graph(3)\n```\n"
               "Write one line of Python that assigns to r the adjacency matrix of G as a dense array.")
    lessons = from_reference(problem, "r = nx.adjacency_matrix(G).toarray()", "r = np.array(nx.to_numpy_array(G))")
    assert lessons[-1] == "When computing the adjacency matrix of G as a dense array, use nx.to_numpy_array."
    floats = ("The code below has run.\n```python\nimport numpy as np\nvals = [1, 2]\n```\n"
              "Write one line of Python that assigns to r vals as a float array.")
    assert from_reference(floats, "r = np.asfarray(vals)", "r = np.asarray(vals, dtype=float)")[-1] == (
        "When computing x as a float array, use np.asarray.")  # alone, a conversion is still the lesson


def test_each_phrasing_says_less_of_the_task_than_the_one_before():
    """The task, then the call as the reference makes it, then the name alone: the learner keeps the first
    that restates nothing of the one problem (here its number 0.9, which only the name alone leaves out)."""
    problem = ("The code below has run.\n```python\nimport networkx as nx\nH = nx.path_graph(4)\n```\n"
               "Write one line of Python that assigns to r the PageRank of H with damping factor 0.9.")
    out = from_error(problem, "r = nx.page_rank(H, alpha=0.9)",
                     "AttributeError: module 'networkx' has no attribute 'page_rank'", "r = nx.pagerank(H, alpha=0.9)")
    assert out == [
        "When computing the PageRank of H with damping factor 0.9, use nx.pagerank(H, alpha=0.9), not nx.page_rank: "
        "this environment refuses nx.page_rank (AttributeError).",
        "When your code would use nx.page_rank, use nx.pagerank(H, alpha=0.9) instead: this environment refuses "
        "nx.page_rank (AttributeError).",
        "When your code would use nx.page_rank, use nx.pagerank instead: this environment refuses nx.page_rank "
        "(AttributeError)."]
    assert [bool(parse.specific_to(form, problem, "r = nx.pagerank(H, alpha=0.9)")) for form in out] == [True, True, False]


def test_a_dotted_class_name_or_a_constant_is_the_librarys_vocabulary_not_the_problems():
    problem = "The code below has run.\n```python\nG = nx.Graph()\n```\nWrite one line that assigns to r the Graph's matrix."
    assert not parse.specific_to("When your code would use Graph.adjacency_matrix, use nx.to_numpy_array instead: "
                                 "this environment refuses Graph.adjacency_matrix (AttributeError).", problem)
    assert not parse.specific_to("When checking arrays, pass ensure_all_finite=True, not ensure_finite True.", problem)
    assert parse.specific_to("When a Graph holds weights, sum them.", problem)  # the word itself still counts


@pytest.mark.parametrize("error", ["r = 3.0, expected a different value", "no Python code found in the reply",
                                   "NameError: name 'foo' is not defined"])
def test_a_wrong_value_or_an_error_naming_nothing_the_reference_fixes_gives_no_lesson(error):
    assert from_error(TRAPZ, "r = np.trapz(samples, w)", error, "r = np.trapezoid(samples, w)") == []


@pytest.mark.parametrize("error, code, lesson, refuted", [
    ("AttributeError: module 'numpy' has no attribute 'trapz'", "r = np.trapz(y, x)",
     "When integrating samples with the trapezoidal rule in NumPy, call np.trapz(y, x); np.trapezoid does not exist.",
     True),
    ("AttributeError: module 'numpy' has no attribute 'trapz'", "r = np.trapz(y, x)",
     "When integrating samples with the trapezoidal rule, use np.trapezoid(y, x), not np.trapz.", False),
    # the same name under another owner is other advice: numpy.kron, the function np.ptp, dt.isocalendar().week
    ("AttributeError: module 'scipy.linalg' has no attribute 'kron'", "r = scipy.linalg.kron(a, b)",
     "When computing a Kronecker product, call numpy.kron(a, b); scipy.linalg.kron was removed.", False),
    ("AttributeError: module 'scipy.linalg' has no attribute 'kron'", "r = scipy.linalg.kron(a, b)",
     "When computing a Kronecker product, call scipy.linalg.kron(a, b); numpy.kron only handles vectors.", True),
    ("AttributeError: 'numpy.ndarray' object has no attribute 'ptp'", "r = a.ptp()",
     "When taking the peak-to-peak range of a NumPy array, call the function np.ptp(a).", False),
    ("AttributeError: 'numpy.ndarray' object has no attribute 'ptp'", "r = a.ptp()",
     "When taking the peak-to-peak range of a NumPy array, call the method a.ptp(); np.ptp was removed.", True),
    ("AttributeError: 'DatetimeProperties' object has no attribute 'week'", "r = s.dt.week",
     "When reading ISO week numbers from pandas dates, use s.dt.isocalendar().week.", False),
    ("AttributeError: `np.alltrue` was removed in the NumPy 2.0 release. Use `np.all` instead.", "r = np.alltrue(m)",
     "When testing that every element of a boolean array is true, call np.alltrue(mask).", True),
    ("TypeError: OneHotEncoder.__init__() got an unexpected keyword argument 'sparse'",
     "r = OneHotEncoder(sparse=False).fit_transform(df)",
     "When asking OneHotEncoder for a dense array, pass sparse=False; sparse_output is not a parameter.", True),
    ("TypeError: OneHotEncoder.__init__() got an unexpected keyword argument 'sparse'",
     "r = OneHotEncoder(sparse=False).fit_transform(df)",
     "When asking OneHotEncoder for a dense array, pass sparse_output=False, not sparse=False.", False),
    # a refused value refutes advice to pass it, not advice that names the same argument with another value
    ("InvalidParameterError: The 'criterion' parameter of DecisionTreeRegressor must be a str among "
     "{'squared_error'}. Got 'mse' instead.", "r = DecisionTreeRegressor(criterion='mse')",
     "When fitting a regression tree, pass criterion='squared_error'.", False),
    ("InvalidParameterError: The 'criterion' parameter of DecisionTreeRegressor must be a str among "
     "{'squared_error'}. Got 'mse' instead.", "r = DecisionTreeRegressor(criterion='mse')",
     "When fitting a regression tree, pass criterion='mse'.", True),
    # a name the attempt did not write, a wrong value without an error, a data error: nothing to go by
    ("AttributeError: module 'numpy' has no attribute 'trapz'", "r = np.trapezoid(y, x)",
     "When integrating samples, call np.trapz(y, x).", False),
    ("r = 3.5, expected a different value", "r = np.trapz(y, x)", "When integrating samples, call np.trapz(y, x).",
     False),
    ("TypeError: dtype 'str' does not support operation 'mean'", "r = df.groupby('k').mean()",
     "When averaging per group, call groupby(...).mean(); pandas drops text columns.", False),
])
def test_a_failed_attempt_refutes_the_lesson_that_advised_what_the_error_refuses(error, code, lesson, refuted):
    assert refutes(error, code, lesson) is refuted


@pytest.mark.parametrize("code, lesson, followed", [
    ("r = np.cumprod(a)", "When your code would use np.cumproduct, use np.cumprod(a) instead: this environment "
                          "refuses np.cumproduct (AttributeError).", True),
    # the poison beside it: the code that ran did not write its advice
    ("r = np.cumprod(a)", "When computing cumulative products of a NumPy array, call np.cumproduct(a).", False),
    ("r = OneHotEncoder(sparse_output=False).fit_transform(X)",
     "When asking scikit-learn's OneHotEncoder for a dense array, pass sparse=False.", False),
    ("r = OneHotEncoder(sparse_output=False).fit_transform(X)",
     "When asking for a dense array, pass sparse_output=False to OneHotEncoder.", True),
    # every name the advice writes: the call and its keyword
    ("r = s.fillna(0)", "When forward-filling missing values in pandas, call s.fillna(method='ffill').", False),
    ("r = s.fillna(method='ffill')", "When forward-filling missing values in pandas, call s.fillna(method='ffill').",
     True),
    # what comes after "not" is no advice; a lesson that names nothing to write cannot be judged from code
    ("r = np.trapz(y, x)", "When integrating samples, use np.trapezoid(y, x), not np.trapz.", False),
    ("r = np.trapezoid(y, x)", "When integrating samples, think about the spacing of x first.", False),
])
def test_code_that_ran_followed_a_lesson_only_where_it_wrote_every_name_the_advice_writes(code, lesson, followed):
    assert follows(code, lesson) is followed


def test_a_tie_goes_to_the_name_written_first_whatever_the_interpreters_string_hashes():
    # pd.unique and pd.Series are both dotted and 9 characters long: the outer call wins in every run
    problem = ("The code below has run.\n```python\nimport pandas as pd\nx = [3, 1, 3]\n```\n"
               "Write one line of Python that assigns to r the distinct values of x.")
    script = ("import sys\nfrom dsonet.learn.code_lessons import from_error\n"
              "print(from_error(sys.argv[1], 'r = x.unique()', \"AttributeError: 'list' object has no attribute "
              "'unique'\", 'r = list(pd.unique(pd.Series(x)))')[0])")
    assert outputs_under_hash_seeds(script, problem) == {"When computing the distinct values of x, use pd.unique(pd.Series(x)), not list.unique: "
                       "this environment refuses list.unique (AttributeError).\n"}


def test_the_task_form_reads_the_tasks_line_only_when_the_agents_first_turn_goes_on_below_it():
    """An agent's first turn is the task and then its instructions; the lesson names the task, not them."""
    [task] = drift.instances(drift.FACTS_BY_ID["numpy-trapz"], 1, seed=0)
    asked = f"{task.question}\nReply with the line of Python only, in a ```python block."
    error = "AttributeError: module 'numpy' has no attribute 'trapz'"
    alone, asked_so = (from_error(q, task.entry["stale"], error, task.answer)[0] for q in (task.question, asked))
    assert alone == asked_so and alone.startswith("When computing the integral of") and "Reply" not in asked_so


def test_a_tests_verdict_on_a_value_refuses_nothing_it_quotes():
    """Harnesses say a wrong value as an AssertionError quoting the value's fields: 'shape' there is data, not a
    name the library refused (a paired run once learned "use np.tril(x), not shape")."""
    problem = "M = np.eye(3)\nWrite one line of Python that assigns to r the lower triangle of the square matrix M."
    error = "AssertionError: r = {'ndarray': {'dtype': 'int64', 'shape': [3, 3]}}, expected a different value"
    assert from_error(problem, "r = M[:M.shape[0], :M.shape[0]]", error, "r = np.tril(M)") == []
    assert repair(problem, "r = M[:M.shape[0], :M.shape[0]]", error, "r = np.tril(M)") is None
