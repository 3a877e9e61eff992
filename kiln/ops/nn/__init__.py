"""Neural-network ops: softmax and linear, activations, normalization, losses, convolution and
pooling, attention, dropout, embeddings.
"""
