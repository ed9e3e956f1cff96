"""The eager backend: TensorFlow 2 loops (``sv.track``/``sv.step``) and Keras 3 ``model.fit``
(``callbacks=[sv.callback]``) under the same promises as the graph Supervisor. Imports
TensorFlow (and Keras on first use of ``sv.callback``), nothing of IPython or ipywidgets."""
from .eager_supervisor import EagerSupervisor

__all__ = ["EagerSupervisor"]
