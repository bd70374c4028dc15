"""Hugging Face's Trainer under `shmrun --sweep`: its steps as the records
`shmtrain_torch.report()` writes, so a sweep ranks the settings by the
Trainer's samples/s rather than the script's wall time (model loading and
all).  Imports transformers; `import shmtrain_torch` does not.

    from shmtrain_torch.hf import ReportCallback
    trainer = Trainer(model, args, train_dataset=..., callbacks=[ReportCallback()])

One report() an optimizer step: samples = the Trainer's global batch
(per-device batch x accumulation steps x processes), tokens = samples x
`tokens_per_sample` where given (a language model's window), the loss the
Trainer logs at that step (it logs the mean since its previous log; steps
between logs go without one).

`--sweep-global-batch` holds the global batch by exporting each setting's
accumulation steps (SHMTRAIN_GRAD_ACCUM); the Trainer reads its own from
TrainingArguments, so a Trainer that does not take them would train another
batch than the sweep compares: the callback stops it at the start, by name.
"""
import os

from transformers import TrainerCallback

from .report import report


class ReportCallback(TrainerCallback):
    def __init__(self, tokens_per_sample=None):
        self.tokens_per_sample = tokens_per_sample
        self._waiting_for_log = None  # the step whose record waits for the loss the Trainer is about to log

    def on_train_begin(self, args, state, control, **kwargs):
        asked = os.environ.get("SHMTRAIN_GRAD_ACCUM")
        if asked is not None and int(asked) != args.gradient_accumulation_steps:
            raise ValueError(f"shmtrain_torch.hf.ReportCallback: shmrun --sweep-global-batch asks "
                             f"{asked} accumulation steps a step (SHMTRAIN_GRAD_ACCUM) and the Trainer takes "
                             f"{args.gradient_accumulation_steps}: pass gradient_accumulation_steps="
                             f"int(os.environ.get('SHMTRAIN_GRAD_ACCUM', '1')) to TrainingArguments")

    def on_step_end(self, args, state, control, **kwargs):
        # The Trainer logs after this callback, in the same step, when
        # DefaultFlowCallback (ahead of this one) has set should_log.
        self._flush(args)  # a log asked for and not made: that step goes without its loss
        if control.should_log:
            self._waiting_for_log = state.global_step
        else:
            self._report(args, state.global_step, None)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._flush(args, (logs or {}).get("loss"))

    def on_train_end(self, args, state, control, **kwargs):
        self._flush(args)

    def _flush(self, args, loss=None):
        if self._waiting_for_log is not None:
            self._report(args, self._waiting_for_log, loss)
            self._waiting_for_log = None

    def _report(self, args, step, loss):
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        tokens = samples * self.tokens_per_sample if self.tokens_per_sample else None
        report(step=step, samples=samples, loss=loss, tokens=tokens)
