"""A job's model as real jobs give it (#23): preset, model file, architecture fields; a job
naming none is still federated (whole or by replicas) at the documented default cost, and the
plan says so."""

from hyperplace.federation import federate
from hyperplace.federation.generator import federation_instance, member
from hyperplace.federation.problem import DEFAULT_MODEL, FederationProblem, from_training_job, \
    job_model
from hyperplace.models.job import TrainingJob


def _dp_job(model: str, annotations: dict | None = None) -> TrainingJob:
    return TrainingJob.model_validate({
        "apiVersion": "ai.example.com/v1alpha1", "kind": "FoundationModelTrainingJob",
        "metadata": {"name": "plain-dp", "annotations": annotations or {}},
        "spec": {"model": model, "replicaCount": 2, "resourceGroups": [
            {"name": "dp", "type": "DataParallel", "gpusPerGroup": 8}]}})


def test_unknown_model_is_federated_at_the_default_cost():
    inst = federation_instance("two", [member("a", "H100-80", 1), member("b", "H100-80", 1)],
                               [("a", "b", 400.0, 5.0)])
    fjob = from_training_job(_dp_job("m"))
    assert fjob.model.name == DEFAULT_MODEL and "priced as" in fjob.model_note
    plan = federate(FederationProblem(inst, [fjob], max_slowdown=10), budget_s=10)
    assert [j.job for j in plan.jobs] == ["plain-dp"]   # split by replicas over a and b
    assert any("priced as llama3-8b" in n for n in plan.jobs[0].notes)
    assert not plan.pending


def test_architecture_fields_and_presets():
    m, note = job_model(_dp_job("my-7b", {"hyperplace.io/model-layers": "32",
                                          "hyperplace.io/model-hidden": "4096",
                                          "hyperplace.io/model-heads": "32",
                                          "hyperplace.io/model-vocab": "32000"}))
    assert (m.name, m.num_layers, m.hidden_size, note) == ("my-7b", 32, 4096, "")
    assert job_model(_dp_job("llama3-70b"))[0].name == "llama3-70b"
