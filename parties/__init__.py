"""The two parties' logic: the curator (projection, oracle, budget) and the modeler
(GP posterior, acquisition strategies), as plain synchronous numpy code, plus thin
asyncio runners that drive them over a `protocol.channel.Channel`.
"""
