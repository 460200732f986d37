"""The base of every live figure in the course (layer 4): redrawn in the cell as events arrive.

`labkit.show.live` (a value per rank), `labkit.memory.live.Display` (memory per rank and phase)
and `labkit.pipeline.plots.live_gantt` (a pipeline's Gantt chart) are subclasses. Importing this
module imports neither matplotlib nor torch, so rank-side code may import its neighbours.
"""
import time


class LiveFigure:
    """A figure in the cell that redraws while a run goes on, from `labkit.emit(...)` events.

    Subclasses define `_take(event) -> bool` (keep what the event says; True if the picture
    changed) and `figure()`. Used as a context manager around `cluster.run(...)`: it redraws
    through one display handle at most `fps` times a second and spends at most about a quarter
    of the time drawing (a slow machine gets fewer frames, not a slower run); on exit the final
    figure stays in the cell as a static PNG (nbconvert, nbval)."""

    def __init__(self, cluster, fps: float):
        self.cluster, self.fps = cluster, fps
        self._handle, self._last = None, 0.0
        self._gap = 1.0 / fps          # seconds from the end of one redraw to the next

    def _take(self, event) -> bool:
        raise NotImplementedError

    def figure(self):
        raise NotImplementedError

    def _on_event(self, event) -> None:
        if self._take(event) and time.monotonic() - self._last > self._gap:
            self._draw()

    def _draw(self) -> None:
        t0 = time.monotonic()
        fig = self.figure()
        try:
            from IPython.display import display
            if self._handle is None:
                self._handle = display(fig, display_id=True)
            else:
                self._handle.update(fig)
        finally:
            import matplotlib.pyplot as plt
            plt.close(fig)
            self._last = time.monotonic()
            self._gap = max(1.0 / self.fps, 3 * (self._last - t0))

    def __enter__(self):
        self._unsubscribe = self.cluster.on_event(self._on_event)
        return self

    def __exit__(self, *exc):
        self._unsubscribe()
        self._draw()
