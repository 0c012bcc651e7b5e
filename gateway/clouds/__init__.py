"""Cloud providers: AWS Bedrock (``api: bedrock``), Google Vertex AI (``api: vertex``) and
Azure OpenAI (``api: azure``), each a provider kind whose deployments are deployments like
any other (docs/clouds.md).

What sets a cloud apart is only how it is reached: where a request for a model goes (the
URL names the model), what the body may hold (Bedrock and Vertex take Anthropic's
Messages body without ``model``), how each attempt is authenticated (a SigV4 signature,
a refreshed OAuth or Entra ID token) and how a stream is framed (Bedrock's AWS event
stream). Everything after that (classification, recovery, translation, the relay) is the
gateway's usual path.

The cloud libraries are optional extras (``llm-gateway[aws]``, ``[gcp]``, ``[azure]``),
imported only when a policy names their kind.
"""
