"""torch.tpu.ops"""
