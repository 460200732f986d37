"""Autograding in bounded time: only the cells the grades need, each under a time limit.

nbgrader's `Execute` runs every cell of a submission, demos included, one after the other; a
learner's hang inside the kernel then costs a cell timeout for every cell after it, and a
crashed kernel ends the submission. `Bounded` (nbgrader_config.py of `labkit.grading.init` puts
it in place of `Execute` in `Autograde.autograde_preprocessors`) instead:

- runs only the **needed** cells: each autograder tests cell and, recursively, the last cell
  before it that defines a name it reads (its exercise cell, the imports, a learner's helper in
  a cell of their own), the last cell before it that starts a `labkit.Cluster` (the checkers run
  on the current cluster) and every cell that sets the language (`set_lang`). The names are
  read from the code (`ast`, IPython's magics translated first), not guessed: a cell that
  defines nothing a graded cell reads is not run, and shows no output in the feedback;
- gives each cell `Execute.timeout` seconds (interrupted, then the kernel replaced) and the
  whole submission `Bounded.submission_timeout` seconds; a kernel that died or hung is
  replaced, and the next tests cell runs its needed cells again in the new kernel. A tests cell
  that could not run (its cells died, hung or the submission's time ran out) gets an error
  output, so nbgrader gives it no points (a tests cell without an error gets them all).
"""
import ast
import time

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from traitlets import Bool, Integer

from nbgrader.preprocessors import Execute

CLUSTER = "<a labkit.Cluster>"        # what a cell that starts a cluster defines and a checker reads


def _tree(source: str):
    from IPython.core.inputtransformer2 import TransformerManager
    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:                 # such a cell runs nothing, so it defines nothing
        return None


def _attr_path(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _scope(nodes, params=(), module=False) -> tuple:
    """(names bound in this scope, names it reads from outside, names declared `global` in it
    or in a scope inside it); in the module's scope every name read counts (`x = x + 1` reads
    an earlier cell's x).
    Nested functions, lambdas, classes and comprehensions are scopes of their own: what they
    bind stays theirs, what they read and do not bind is read here."""
    bound, reads, declared = set(params), set(), set()

    def nested(body, args=(), cls=False):
        b, r, g = _scope(body, args, module=cls)      # a class's names are not its methods'
        reads.update(r)
        declared.update(g)
        return b

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for expr in [*a.defaults, *[d for d in a.kw_defaults if d is not None],
                         *getattr(node, "decorator_list", [])]:
                visit(expr)
            args = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x]
            if isinstance(node, ast.Lambda):
                nested([node.body], args)
            else:
                bound.add(node.name)
                nested(node.body, args)
        elif isinstance(node, ast.ClassDef):
            for expr in [*node.bases, *[k.value for k in node.keywords], *node.decorator_list]:
                visit(expr)
            bound.add(node.name)
            nested(node.body, cls=True)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            visit(node.generators[0].iter)
            targets = [n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)]
            rest = [*[g.iter for g in node.generators[1:]], *[c for g in node.generators for c in g.ifs]]
            rest += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            nested(rest, targets)
        elif isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        else:
            if isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
            for child in ast.iter_child_nodes(node):
                visit(child)

    for node in nodes:
        visit(node)
    local = bound - declared
    return local, reads if module else reads - local, declared


def names(source: str) -> tuple:
    """(names the cell defines, names it reads, whether it must always run) of a code cell.
    A name a function of the cell reads and does not bind counts as read (when the function
    runs, the name must be there); what a function binds is its own."""
    tree = _tree(source)
    if tree is None:
        return set(), set(), False
    bound, reads, declared = _scope(tree.body, module=True)
    defines, always = bound | declared, False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and _attr_path(node.value.func).split(".")[-1] == "Cluster":
            defines.add(CLUSTER)              # kept open (`with Cluster() as c:` closes its own)
        if isinstance(node, ast.Call):
            path = _attr_path(node.func)
            if path.startswith(("labkit.check.", "labkit.grading.")):
                reads.add(CLUSTER)
            elif path.split(".")[-1] == "set_lang":
                always = True
    return defines, reads, always


def is_tests(cell) -> bool:
    m = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and m.get("grade", False) and not m.get("solution", False)


def plan(cells) -> dict:
    """{index of each autograder tests cell: [the indices of the cells it needs, in order]}."""
    code = {i: names(c.source) for i, c in enumerate(cells) if c.cell_type == "code"}
    always = [i for i, (_, _, a) in code.items() if a]

    def needs(i, seen):
        for name in code[i][1]:
            definer = max((j for j in code if j < i and name in code[j][0]), default=None)
            if definer is not None and definer not in seen:
                seen.add(definer)
                needs(definer, seen)
        return seen

    out = {}
    for t, cell in enumerate(cells):
        if is_tests(cell):
            deps = needs(t, set())
            for a in always:
                if a < t and a not in deps:
                    deps |= {a} | needs(a, set())
            out[t] = sorted(deps)
    return out


def _error(cell, ename: str, text: str) -> None:
    cell.outputs.append(NotebookNode(output_type="error", ename=ename, evalue=text,
                                     traceback=[f"{ename}: {text}"]))


class Bounded(Execute):
    """nbgrader's Execute, running only the needed cells, each cell and the submission bounded."""

    submission_timeout = Integer(600, help="seconds for the whole submission; the tests cells "
                                 "not run by then get no points").tag(config=True)
    only_needed = Bool(True, help="run only the cells the tests cells need (False: every code "
                       "cell before each tests cell, with the same limits)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        cell_limit, deadline = self.timeout, time.monotonic() + self.submission_timeout
        needs = plan(nb.cells)
        if not self.only_needed:
            code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
            needs = {t: [i for i in code if i < t] for t in needs}
        steps = sorted(needs)
        try:
            while steps:
                self.shutdown_kernel = "graceful"
                with self.setup_kernel():
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    ran, broken = set(), None          # the cells run in this kernel
                    while steps and broken is None:
                        t = steps.pop(0)
                        for i in [*needs[t], t]:
                            if i in ran:
                                continue
                            left = deadline - time.monotonic()
                            if left < 1:
                                broken = "out of time"
                            else:
                                self.timeout = max(1, int(min(cell_limit, left)))
                                broken = self._run(i, resources)
                                ran.add(i)
                            if broken is not None:
                                if broken == "out of time" or i != t:
                                    _error(nb.cells[t], "NotGraded", self._why(broken, i, t))
                                break
                    if broken is not None:
                        self.shutdown_kernel = "immediate"    # hung or dead: no waiting for it
                if broken == "out of time":
                    for t in steps:
                        _error(nb.cells[t], "NotGraded", self._why(broken, t, t))
                    steps = []
        finally:
            self.timeout = cell_limit
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run(self, i, resources):
        """Run cell i: None, or why the kernel must be replaced ("died", "hung")."""
        cell = self.nb.cells[i]
        try:
            self.preprocess_cell(cell, resources, i)
        except DeadKernelError:
            _error(cell, "KernelDied", "the kernel stopped while running this cell (a crash in "
                   "this code?); grading went on in a new kernel")
            return "died"
        except CellTimeoutError:          # interrupted, and still no answer: SIGINT ignored?
            _error(cell, "CellTimeoutError", f"this cell ran past {self.timeout} s and did not stop "
                   "when interrupted; grading went on in a new kernel")
            return "hung"
        if any(o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
               for o in cell.outputs):
            return "hung"
        return None

    def _why(self, broken, i, t) -> str:
        if broken == "out of time":
            return (f"not run: the submission's {self.submission_timeout} s ran out before "
                    f"cell {i}" + (", which this cell needs" if i != t else ""))
        what = "stopped (the kernel died)" if broken == "died" else f"ran past {self.timeout} s"
        return f"not run: cell {i}, which this cell needs, {what}"
