"""Every use of another library's private API, in one place.

TensorFlow, Keras, ipykernel and ipywidgets offer no public way to do these things; each is a
small function in this package, one module per library (``tensorflow``, ``keras``, ``kernel``),
saying what it reaches into, why, and the versions it was checked against, so that an upgrade
means reading these files and ``tests/test_compat.py``, which has a test per entry that fails
loudly, naming the entry, when what it reaches into is gone. Each module ends with its
``PROBES``: the checks, run once per process by ``capabilities``, that turn a feature off for a run
(with one note at its start) where the running library lacks what the feature needs, so that an
internal that moved never raises from inside ``fit``.

The libraries are imported when an entry is used, so that this package serves the
TensorFlow-free layers (``%load_ext``, ``view/``) too. Callers use the entries through this
package (``compat.fit_argument``), which is why it names them all.
"""
from .registry import CompatError, Probe
from .tensorflow import (SaveParts, add_control_input, call_flat, checkpoint_object_graph,
                         checkpoint_tensors, deprecations_silenced, event_file_writer,
                         global_seed, is_trackable, meta_graph_def, random_nodes,
                         report_error_to_cluster, reshuffling_nodes, save_parts,
                         session_closed, session_interface,
                         saveables_by_key, saver_var_list, saves_own_tensors,
                         serializes_to_tensors, session_manager_steps, stop_event_is_set,
                         unfinalize, update_checkpoint_state)
from .keras import (adapter_dataset, array_samples, callback_state_attributes, compiled_unbuilt,
                    count_drawn, count_iterators, current_iterator, drain_generator, epoch_dataset,
                    fit_argument, fit_callbacks, fit_data_spec, fit_epoch_iterator, input_kind,
                    is_fit_validation, keras_seed_set, learning_rate_name, make_iterators,
                    py_dataset_shuffles, rebuilt_dataset, set_epoch_dataset, set_initial_epoch,
                    shuffle_batch_indices, shuffles_arrays, symbolic_build)
from .kernel import (PollerOs, is_inline_flush, kernel_display_publisher, parent_poller_module,
                     post_execute_callbacks, pyplot_figure_managers, shutdown_request_tables,
                     widget_display_data)
from . import keras as _keras, kernel as _kernel, tensorflow as _tensorflow

PROBES = (*_tensorflow.PROBES, *_keras.PROBES, *_kernel.PROBES)
