"""torch's "torch.backends" entry point for shmtrain_torch: `import torch`
registers the backend "shm", so `init_process_group("shm")` needs no import
of ours.  A backend that does not load (built against another PyTorch) is a
warning here, never a failed `import torch`."""


def load():
    try:
        import shmtrain_torch  # noqa: F401  registers "shm"
    except Exception as e:  # noqa: BLE001  anything: torch's import must go on
        import warnings
        warnings.warn(f"shmtrain_torch: the shm backend did not load ({e}); "
                      "pip install --no-build-isolation ./python against this PyTorch")
